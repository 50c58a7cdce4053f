//! A throwaway `nats-server` with JetStream, owned by one test so that the
//! test can kill it and start it again on the same port and store.

use std::process::Command;

use crate::harness::server_process::ServerProcess;

/// A `nats-server -js` child process on a loopback port.
pub struct NatsServer {
    process: ServerProcess,
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
        let user = user.map(|(u, p)| (u.to_string(), p.to_string()));
        let credentials = user.clone();
        let process = ServerProcess::start("nats-server", move |dir, port| {
            let mut command = Command::new("nats-server");
            command
                .args(["-js", "-a", "127.0.0.1", "-p"])
                .arg(port.to_string())
                .arg("-sd")
                .arg(dir.join("js"));
            if let Some((user, password)) = &credentials {
                command.args(["--user", user, "--pass", password]);
            }
            command
        });
        NatsServer { process, user }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port())
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

    /// Kills the server with SIGKILL (no clean shutdown).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server (again) on the same port and store, waiting until
    /// it accepts connections.
    pub fn start_again(&mut self) {
        self.process.start_again();
    }
}
