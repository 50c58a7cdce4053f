//! A throwaway Postgres cluster per test.
//!
//! [`PgCluster::start`] runs `initdb` into a fresh temporary directory and
//! starts a server on a free loopback port with logical replication enabled.
//! The server deliberately runs with `TimeZone = 'America/New_York'` and
//! `DateStyle = 'SQL, DMY'` so that tests prove weft's rendering does not
//! depend on the server's own settings.
//!
//! * Authentication is `trust` for every user on 127.0.0.1 and the cluster's
//!   unix socket; the superuser is `postgres`. Extra `pg_hba.conf` rules (for
//!   password tests) go first through [`PgOptions::hba_rules`].
//! * Postgres refuses to run as root. When the test runs as root, `initdb`,
//!   `pg_ctl` and `postgres` run as the `postgres` system user (`runuser`) and
//!   the temporary directory is handed to that user.
//! * Binaries come from `pg_config --bindir`, then `/usr/lib/postgresql/*/bin`
//!   (newest first), then `PATH`.
//! * Dropping the cluster stops the server in immediate mode and deletes the
//!   directory, also when the test panics.
//!
//! Every method is synchronous (it runs short child processes), so the
//! cluster works from plain `#[test]`s and from `#[tokio::test]`s alike; only
//! [`PgCluster::client`] is async.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Settings for [`PgCluster::start_with`] beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct PgOptions {
    /// `pg_hba.conf` lines placed before the default trust rules, e.g.
    /// `host all alice 127.0.0.1/32 scram-sha-256`.
    pub hba_rules: Vec<String>,
    /// Extra `postgresql.conf` lines, e.g. `wal_level = replica`.
    pub settings: Vec<String>,
    /// Serve TLS with this certificate and key (`ssl = on`).
    pub tls: Option<ServerTls>,
    /// The cluster's encoding (`initdb -E`); `UTF8` when `None`.
    pub encoding: Option<&'static str>,
}

/// TLS settings of a test cluster.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate and key (copied into the data directory).
    pub files: crate::harness::certs::CertFiles,
    /// Accept TCP connections only over TLS: `pg_hba.conf` gets `hostssl`
    /// lines instead of the default `host` ones.
    pub tls_only: bool,
    /// A CA file for client certificates (`ssl_ca_file`), if any.
    pub client_ca: Option<PathBuf>,
}

/// A running throwaway Postgres server; see the module docs.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bindir: PathBuf,
    port: u16,
    running: bool,
}

impl PgCluster {
    /// Starts a fresh cluster with the default settings.
    pub fn start() -> PgCluster {
        Self::start_with(PgOptions::default())
    }

    /// Starts a fresh cluster with extra settings.
    pub fn start_with(options: PgOptions) -> PgCluster {
        let bindir = find_bindir();
        let dir = tempfile::Builder::new()
            .prefix("weft-pg-")
            .tempdir()
            .expect("create a temporary directory for the Postgres cluster");
        let mut cluster = PgCluster {
            dir,
            bindir,
            port: 0,
            running: false,
        };
        std::fs::create_dir(cluster.socket_dir()).expect("create the socket directory");
        hand_to_postgres_user(cluster.dir.path());
        hand_to_postgres_user(&cluster.socket_dir());
        cluster.initdb(&options);
        // A free port can be taken by someone else between probing and
        // binding; retry a few times before giving up.
        let mut last_error = String::new();
        for _ in 0..5 {
            cluster.port = free_port();
            cluster.write_port();
            match cluster.pg_ctl(&["start", "-w", "-t", "60", "-l", &cluster.log_path()]) {
                Ok(_) => {
                    cluster.running = true;
                    return cluster;
                }
                Err(e) => last_error = e,
            }
        }
        panic!(
            "Postgres did not start: {last_error}\nserver log:\n{}",
            cluster.server_log()
        );
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `postgres://` URL for the superuser `postgres` and database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A `postgres://` URL for `user` (with `password`) and database `db`.
    pub fn url_as(&self, user: &str, password: Option<&str>, db: &str) -> String {
        match password {
            Some(password) => format!("postgres://{user}:{password}@127.0.0.1:{}/{db}", self.port),
            None => format!("postgres://{user}@127.0.0.1:{}/{db}", self.port),
        }
    }

    /// The path of Postgres client program `name` (e.g. `pg_recvlogical`)
    /// from the same installation as the server.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }

    /// The directory holding the server's unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs SQL through `psql` as `postgres` in database `postgres` and
    /// returns the unaligned, tuples-only output. Panics on any error.
    /// Several statements in one call run as one transaction (`psql -c`);
    /// use separate calls for separate transactions.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("postgres", sql)
    }

    /// Waits until replication slot `slot` exists and a walsender streams
    /// from it: from then on every committed change reaches its consumer.
    pub fn wait_for_active_slot(&self, slot: &str) {
        let query = format!("SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}'");
        super::wait::until(
            &format!("replication slot {slot} active"),
            std::time::Duration::from_secs(60),
            std::time::Duration::from_millis(100),
            || match self.psql(&query).trim() {
                "t" => Ok(()),
                other => Err(other.to_string()),
            },
            String::new,
        );
    }

    /// The `databases:` block of a weft config for this cluster: database
    /// `shop` reading through slot and publication `slot`, both created.
    pub fn databases_yaml(&self, slot: &str) -> String {
        self.database_yaml("shop", slot, "")
    }

    /// [`Self::databases_yaml`] with the database named `name` and `extra`
    /// settings (indented lines, e.g. a heartbeat) added to its entry.
    pub fn database_yaml(&self, name: &str, slot: &str, extra: &str) -> String {
        format!(
            "databases:\n  - name: {name}\n    hostname: 127.0.0.1\n    port: {}\n    database: postgres\n    username: postgres\n{extra}    slot: {{ name: {slot}, create_if_not_exists: true }}\n    publication: {{ name: {slot}, create_if_not_exists: true }}\n",
            self.port()
        )
    }

    /// The slot's `confirmed_flush_lsn` as a byte position.
    pub fn confirmed_flush_lsn(&self, slot: &str) -> u64 {
        self.psql(&format!(
            "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("no confirmed_flush_lsn for slot {slot}: {e}"))
    }

    /// The server's current WAL write position as a byte position.
    pub fn current_wal_lsn(&self) -> u64 {
        self.psql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits until the slot has confirmed everything written so far, and
    /// returns its `confirmed_flush_lsn`: from then on, every change written
    /// before the call is either delivered or durably in weft's store.
    pub fn wait_for_slot_to_confirm_all(&self, slot: &str) -> u64 {
        self.wait_for_slot_to_confirm(
            slot,
            self.current_wal_lsn(),
            std::time::Duration::from_secs(60),
            String::new,
        )
    }

    /// Waits up to `timeout` until the slot's `confirmed_flush_lsn` reaches
    /// `lsn` (a byte position), and returns it; on a timeout the failure
    /// shows `context()` (weft's log, say).
    pub fn wait_for_slot_to_confirm(
        &self,
        slot: &str,
        lsn: u64,
        timeout: std::time::Duration,
        context: impl FnOnce() -> String,
    ) -> u64 {
        super::wait::until(
            &format!("slot {slot} confirming {lsn}"),
            timeout,
            std::time::Duration::from_millis(200),
            || {
                let confirmed = self.confirmed_flush_lsn(slot);
                if confirmed >= lsn {
                    Ok(confirmed)
                } else {
                    Err(confirmed)
                }
            },
            context,
        )
    }

    /// Like [`PgCluster::psql`] in database `db`.
    pub fn psql_in(&self, db: &str, sql: &str) -> String {
        self.try_psql_in(db, sql)
            .unwrap_or_else(|e| panic!("psql failed for {sql:?}: {e}"))
    }

    /// Runs SQL through `psql` in `db`; returns stdout or the error text.
    pub fn try_psql_in(&self, db: &str, sql: &str) -> Result<String, String> {
        let output = Command::new(self.bindir.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db, "-c", sql])
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout)
                .trim_end()
                .to_string())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// Creates database `name` (owned by `postgres`).
    pub fn create_database(&self, name: &str) {
        self.psql(&format!(
            "CREATE DATABASE \"{}\"",
            name.replace('"', "\"\"")
        ));
    }

    /// A connected `tokio_postgres::Client` as `postgres` in `db`. The
    /// connection runs on a spawned task of the current runtime.
    pub async fn client(&self, db: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(db), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.url(db)));
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// Stops the server (fast mode) and starts it again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Stops the server (fast mode). Data stays for [`PgCluster::start_again`].
    pub fn stop(&mut self) {
        if self.running {
            self.pg_ctl(&["stop", "-w", "-m", "fast"])
                .unwrap_or_else(|e| panic!("pg_ctl stop failed: {e}"));
            self.running = false;
        }
    }

    /// Starts a stopped server again on the same port.
    pub fn start_again(&mut self) {
        if !self.running {
            self.pg_ctl(&["start", "-w", "-t", "60", "-l", &self.log_path()])
                .unwrap_or_else(|e| {
                    panic!(
                        "pg_ctl start failed: {e}\nserver log:\n{}",
                        self.server_log()
                    )
                });
            self.running = true;
        }
    }

    /// The server log so far, for failure messages.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> String {
        self.dir.path().join("server.log").display().to_string()
    }

    fn initdb(&self, options: &PgOptions) {
        let data = self.data_dir().display().to_string();
        let output = self
            .as_postgres_user(&self.bindir.join("initdb"))
            .args(["-D", &data, "-U", "postgres", "--auth=trust"])
            .args(["-E", options.encoding.unwrap_or("UTF8")])
            .args(["--locale=C", "--no-sync"])
            .output()
            .expect("run initdb");
        check(&output, "initdb");

        let mut conf = String::from("\n# weft test harness\n");
        conf += "listen_addresses = '127.0.0.1'\n";
        conf += &format!(
            "unix_socket_directories = '{}'\n",
            self.socket_dir().display()
        );
        conf += "wal_level = logical\n";
        conf += "max_replication_slots = 20\n";
        conf += "max_wal_senders = 20\n";
        conf += "max_connections = 50\n";
        conf += "TimeZone = 'America/New_York'\n";
        conf += "DateStyle = 'SQL, DMY'\n";
        conf += "fsync = off\n";
        conf += "full_page_writes = off\n";
        conf += "shared_buffers = 32MB\n";
        conf += "wal_sender_timeout = 60s\n";
        for line in &options.settings {
            conf += line;
            conf += "\n";
        }
        append(&self.data_dir().join("postgresql.conf"), &conf);

        if let Some(tls) = &options.tls {
            self.install_tls(tls);
        }

        let path = self.data_dir().join("pg_hba.conf");
        let mut existing = std::fs::read_to_string(&path).expect("read pg_hba.conf");
        if options.tls.as_ref().is_some_and(|t| t.tls_only) {
            existing = "local all all trust\n\
                        hostssl all all 127.0.0.1/32 trust\n\
                        hostssl all all ::1/128 trust\n\
                        hostssl replication all 127.0.0.1/32 trust\n"
                .to_string();
        }
        let rules = options.hba_rules.join("\n");
        std::fs::write(&path, format!("{rules}\n{existing}")).expect("write pg_hba.conf");
    }

    /// Copies the server certificate and key into the data directory
    /// (owned by the server's user, key mode 0600) and turns `ssl` on.
    fn install_tls(&self, tls: &ServerTls) {
        use std::os::unix::fs::PermissionsExt;
        let data = self.data_dir();
        let mut copies = vec![
            (&tls.files.cert, "server.crt"),
            (&tls.files.key, "server.key"),
        ];
        if let Some(ca) = &tls.client_ca {
            copies.push((ca, "client-ca.crt"));
        }
        for (from, to) in copies {
            let target = data.join(to);
            std::fs::copy(from, &target)
                .unwrap_or_else(|e| panic!("copy {} into the data dir: {e}", from.display()));
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))
                .expect("restrict the certificate file's mode");
            hand_to_postgres_user(&target);
        }
        let mut conf =
            String::from("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        if tls.client_ca.is_some() {
            conf += "ssl_ca_file = 'client-ca.crt'\n";
        }
        append(&data.join("postgresql.conf"), &conf);
    }

    fn write_port(&self) {
        append(
            &self.data_dir().join("postgresql.conf"),
            &format!("port = {}\n", self.port),
        );
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output, String> {
        let data = self.data_dir().display().to_string();
        let output = self
            .as_postgres_user(&self.bindir.join("pg_ctl"))
            .args(["-D", &data])
            .args(args)
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if output.status.success() {
            Ok(output)
        } else {
            Err(format!(
                "pg_ctl {args:?} exited with {}: {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    fn as_postgres_user(&self, program: &Path) -> Command {
        if nix::unistd::geteuid().is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.running {
            let stopped = self.pg_ctl(&["stop", "-w", "-m", "immediate"]).is_ok();
            if !stopped {
                // pg_ctl failed: signal the postmaster directly so no server
                // outlives its test.
                let pid_file = self.data_dir().join("postmaster.pid");
                if let Some(pid) = std::fs::read_to_string(pid_file)
                    .ok()
                    .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
                {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGQUIT,
                    );
                }
            }
            self.running = false;
        }
    }
}

fn check(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed with {}:\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("find a free loopback port")
        .port()
}

fn hand_to_postgres_user(path: &Path) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let user = nix::unistd::User::from_name("postgres")
        .expect("look up the postgres user")
        .expect("running as root needs a `postgres` system user to run the server");
    std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        .unwrap_or_else(|e| panic!("chown {} to postgres: {e}", path.display()));
}

fn find_bindir() -> PathBuf {
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
                return dir;
            }
        }
    }
    panic!(
        "no Postgres binaries found: install PostgreSQL (initdb, pg_ctl) or put pg_config on PATH"
    );
}
