//! A server a test owns as a child process (a broker, a cache): started on a
//! free loopback port with its own data directory, killed with SIGKILL and
//! started again on the same port and directory, for outage tests. It runs
//! in its own process group, so that a server started through a script
//! (RabbitMQ) is killed with every process the script started.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::wait;
use crate::harness::weft::free_port;

/// Builds the server's command line from its data directory and port.
type CommandLine = Box<dyn Fn(&Path, u16) -> Command + Send + Sync>;

/// One server child process; killed when dropped.
pub struct ServerProcess {
    name: &'static str,
    port: u16,
    dir: tempfile::TempDir,
    command: CommandLine,
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts `name` with `command(dir, port)` and waits until the port
    /// accepts connections. Its stderr goes to `<dir>/<name>.log`.
    pub fn start(
        name: &'static str,
        command: impl Fn(&Path, u16) -> Command + Send + Sync + 'static,
    ) -> ServerProcess {
        let mut server = ServerProcess {
            name,
            port: free_port(),
            dir: tempfile::tempdir().expect("server data dir"),
            command: Box::new(command),
            child: None,
        };
        server.start_again();
        server
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it wrote to stderr so far, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.name)))
            .unwrap_or_default()
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills it and everything in its process group with SIGKILL (no clean
    /// shutdown), and waits until its port is closed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL)
                .expect("SIGKILL server");
            child.wait().expect("reap server");
            wait::until(
                &format!("{} stopping", self.name),
                Duration::from_secs(20),
                Duration::from_millis(50),
                || match TcpStream::connect(("127.0.0.1", self.port)) {
                    Ok(_) => Err(format!("port {} still open", self.port)),
                    Err(_) => Ok(()),
                },
                String::new,
            );
        }
    }

    /// Starts it (again) on the same port and directory, waiting until it
    /// accepts connections.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "{} already runs", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", self.name)))
            .expect("server log");
        let child = (self.command)(self.dir.path(), self.port)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e} (is it installed?)", self.name));
        self.child = Some(child);
        // RabbitMQ takes several seconds to boot, more on a loaded machine.
        let log = self.dir.path().join(format!("{}.log", self.name));
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        let (name, port) = (self.name, self.port);
        let child = self.child.as_mut().unwrap();
        wait::until(
            &format!("{name} listening on port {port}"),
            Duration::from_secs(60),
            Duration::from_millis(50),
            || {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!(
                        "{name} exited ({status}) before listening on port {port}; log:\n{}",
                        log_text()
                    );
                }
                TcpStream::connect(("127.0.0.1", port)).map(drop)
            },
            || format!("log:\n{}", log_text()),
        );
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
