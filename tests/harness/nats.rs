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
    /// `(user, password)` the server requires, if any.
    user: Option<(String, String)>,
}

impl NatsServer {
    /// Starts a server with JetStream storing under a fresh directory.
    pub fn start() -> NatsServer {
        NatsServer::start_with_user(None)
    }

    /// Like [`NatsServer::start`], requiring `(user, password)` if given.
    pub fn start_with_user(user: Option<(&str, &str)>) -> NatsServer {
        let mut server = NatsServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("nats store dir"),
            user: user.map(|(u, p)| (u.to_string(), p.to_string())),
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

    /// A client of this server, with its user if it requires one.
    pub async fn client(&self) -> async_nats::Client {
        let mut options = async_nats::ConnectOptions::new();
        if let Some((user, password)) = &self.user {
            options = options.user_and_password(user.clone(), password.clone());
        }
        options
            .connect(self.url())
            .await
            .expect("connect to nats-server")
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
        let mut command = Command::new("nats-server");
        command
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-sd")
            .arg(self.store());
        if let Some((user, password)) = &self.user {
            command.args(["--user", user, "--pass", password]);
        }
        let child = command
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
