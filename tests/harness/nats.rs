//! A throwaway `nats-server` with JetStream, owned by one test so that the
//! test can kill it and start it again on the same port and store.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::weft::free_port;

/// A `nats-server -js` child process on a loopback port.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a server with JetStream storing under a fresh directory.
    pub fn start() -> NatsServer {
        let mut server = NatsServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("nats store dir"),
        };
        server.start_again();
        server
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("js")
    }

    /// Kills the server with SIGKILL (no clean shutdown).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL nats-server");
            child.wait().expect("reap nats-server");
        }
    }

    /// Starts the server (again) on the same port and store, waiting until
    /// it accepts connections.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "nats-server already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("nats.log"))
            .expect("nats log");
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(self.store())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
