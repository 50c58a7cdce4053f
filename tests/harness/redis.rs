//! A throwaway `redis-server`, owned by one test so that the test can kill
//! it and start it again on the same port (an outage). It keeps nothing on
//! disk: after a restart it is empty, which is what an outage test of a
//! sink that writes (never reads) needs.

use std::process::Command;

use crate::harness::server_process::ServerProcess;

/// A `redis-server` child process on a loopback port.
pub struct RedisServer {
    process: ServerProcess,
}

impl RedisServer {
    /// Starts a server with persistence off.
    pub fn start() -> RedisServer {
        let process = ServerProcess::start("redis-server", |dir, port| {
            let mut command = Command::new("redis-server");
            command
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--port")
                .arg(port.to_string())
                .arg("--dir")
                .arg(dir);
            command
        });
        RedisServer { process }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// A synchronous client of database `db`.
    pub fn connection(&self, db: u32) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/{db}", self.port()))
            .expect("redis url")
            .get_connection()
            .expect("connect to redis-server")
    }

    /// Kills the server with SIGKILL.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again on the same port.
    pub fn start_again(&mut self) {
        self.process.start_again();
    }
}
