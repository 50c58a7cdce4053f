//! Runs the real `weft` binary as a child process and talks to its API.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A free loopback port (bound then released; good enough for tests).
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free loopback ports: all are held while they are picked,
/// so that the kernel cannot hand out the same one twice (two calls of
/// [`free_port`] in a row can get the same port back).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// A `weft run` child process with its own data directory and API port.
pub struct WeftProcess {
    child: Option<Child>,
    config: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    port: u16,
    metrics_port: u16,
    env: Vec<(String, String)>,
    /// `RLIMIT_AS` (bytes) weft runs under, if any.
    address_space_limit: Option<u64>,
}

impl WeftProcess {
    /// Polls `probe` every 200 ms until it gives `Ok`, and returns that;
    /// fails the test with `what`, the last probe's `Err` and weft's log
    /// after `timeout`.
    pub fn wait_until<T, E: std::fmt::Debug>(
        &self,
        what: &str,
        timeout: std::time::Duration,
        probe: impl FnMut() -> Result<T, E>,
    ) -> T {
        self.wait_until_every(what, timeout, std::time::Duration::from_millis(200), probe)
    }

    /// [`Self::wait_until`], polling every `interval`: for a race with weft
    /// that 200 ms would lose.
    pub fn wait_until_every<T, E: std::fmt::Debug>(
        &self,
        what: &str,
        timeout: std::time::Duration,
        interval: std::time::Duration,
        probe: impl FnMut() -> Result<T, E>,
    ) -> T {
        super::wait::until(what, timeout, interval, probe, || {
            format!("log:\n{}", self.log_text())
        })
    }

    /// Waits until weft's log contains `text`; fails the test with the log
    /// after `timeout`.
    pub fn wait_for_log(&self, text: &str, timeout: std::time::Duration) {
        self.wait_until_every(
            &format!("{text:?} in the log"),
            timeout,
            std::time::Duration::from_millis(100),
            || {
                if self.log_text().contains(text) {
                    Ok(())
                } else {
                    Err("not there")
                }
            },
        )
    }

    /// The process's resident set size in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let pid = self.pid().expect("weft runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }

    /// weft's store, opened with `flags` beside the running weft.
    fn open_store(&self, flags: rusqlite::OpenFlags) -> rusqlite::Connection {
        let db = rusqlite::Connection::open_with_flags(self.data_dir.join("weft.db"), flags)
            .expect("open weft's store");
        db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
        db
    }

    /// Runs the statement `sql` on weft's store, as an operator's
    /// `sqlite3` would (a test that damages what weft stored); answers
    /// how many rows it changed.
    pub fn store_execute(&self, sql: &str) -> usize {
        self.open_store(rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .execute(sql, [])
            .expect("a valid store statement")
    }

    /// Runs `sql` on weft's store (read-only) and returns each row's first
    /// column as text.
    pub fn store_query(&self, sql: &str) -> Vec<String> {
        let db = self.open_store(rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
        let mut query = db.prepare(sql).expect("a valid store query");
        query
            .query_map([], |row| row.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Idempotency keys of a push sink's undelivered messages in weft's
    /// store (its outbox), read with SQLite directly. A pull sink's are in
    /// compressed segments: count them with [`Self::stored_count`].
    pub fn stored_keys(&self, sink: &str) -> std::collections::HashSet<String> {
        let db = self.open_store(rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
        let mut query = db
            .prepare("SELECT idempotency_key FROM pull_messages WHERE sink = ?1")
            .unwrap();
        query
            .query_map([sink], |row| row.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// How many undelivered messages weft's store holds for `sink`: its
    /// rows, and the members of its segments not settled yet.
    pub fn stored_count(&self, sink: &str) -> usize {
        let db = self.open_store(rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
        db.query_row(
            "SELECT (SELECT count(*) FROM pull_messages WHERE sink = ?1)
                  + (SELECT coalesce(sum(messages - settled_count), 0)
                     FROM pull_segments WHERE sink = ?1)",
            [sink],
            |row| row.get::<_, i64>(0),
        )
        .unwrap() as usize
    }

    /// Waits until `sink` holds no undelivered message: none in weft's
    /// store, and none waiting or in flight in a push sink's memory lane
    /// (the queue gauges of `/metrics`).
    pub fn wait_until_delivered(&self, sink: &str, timeout: Duration) {
        self.wait_until(&format!("{sink}'s messages delivered"), timeout, || {
            let stored = self.stored_count(sink);
            let waiting = self
                .metric("sequin_messages_buffered", &[("sink", sink)])
                .unwrap_or(0.0)
                + self
                    .metric("sequin_messages_in_delivery", &[("sink", sink)])
                    .unwrap_or(0.0);
            if stored == 0 && waiting == 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "{stored} still stored, {waiting} waiting or in flight"
                ))
            }
        })
    }

    /// Waits until `sink` has at least `count` dead letters, and returns
    /// them as the API lists them (`GET /api/sinks/{sink}/dead_letters`).
    pub fn wait_for_dead_letters(&self, sink: &str, count: usize, timeout: Duration) -> Vec<Value> {
        self.wait_until(&format!("{count} dead letters of {sink}"), timeout, || {
            let listed = self.get_json(&format!("/api/sinks/{sink}/dead_letters?limit=1000"));
            match listed["data"].as_array() {
                Some(letters) if letters.len() >= count => Ok(letters.clone()),
                _ => Err(listed),
            }
        })
    }

    /// Writes `config_yaml` into `dir` and starts weft on it, waiting until
    /// its API answers.
    pub fn start(dir: &Path, config_yaml: &str) -> WeftProcess {
        WeftProcess::start_with_env(dir, config_yaml, &[])
    }

    /// Starts weft on `config_yaml` in a fresh data directory and waits
    /// until it streams from `pg` on the replication slot `slot`. Keep the
    /// directory alive as long as weft.
    pub fn start_replicating(
        pg: &super::postgres::PgCluster,
        slot: &str,
        config_yaml: &str,
    ) -> (tempfile::TempDir, WeftProcess) {
        let dir = tempfile::tempdir().expect("a data directory");
        let weft = WeftProcess::start(dir.path(), config_yaml);
        pg.wait_for_active_slot(slot);
        (dir, weft)
    }

    /// Like [`WeftProcess::start`], with extra environment variables.
    pub fn start_with_env(dir: &Path, config_yaml: &str, env: &[(&str, &str)]) -> WeftProcess {
        WeftProcess::start_limited(dir, config_yaml, env, None)
    }

    /// Like [`WeftProcess::start`], with weft's address space limited to
    /// `bytes` (`ulimit -v`).
    pub fn start_with_address_limit(dir: &Path, config_yaml: &str, bytes: u64) -> WeftProcess {
        WeftProcess::start_limited(dir, config_yaml, &[], Some(bytes))
    }

    fn start_limited(
        dir: &Path,
        config_yaml: &str,
        env: &[(&str, &str)],
        address_space_limit: Option<u64>,
    ) -> WeftProcess {
        let config = dir.join("weft.yml");
        std::fs::write(&config, config_yaml).expect("write the config");
        let [port, metrics_port] = free_ports::<2>();
        let mut weft = WeftProcess {
            child: None,
            config,
            data_dir: dir.join("weft-data"),
            log: dir.join("weft.log"),
            port,
            metrics_port,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            address_space_limit,
        };
        weft.launch();
        weft
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the weft log");
        let mut command = Command::new(weft_binary());
        if let Some(bytes) = self.address_space_limit {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: setrlimit is async-signal-safe, and nothing else runs
            // in the child between fork and exec.
            unsafe {
                use std::os::unix::process::CommandExt;
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = command
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", self.metrics_port))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("WEFT_LOG", "info,weft=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn weft");
        self.child = Some(child);
        self.wait_healthy();
    }

    fn wait_healthy(&mut self) {
        let health = self.url("/health");
        let log = self.log.clone();
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        let child = self.child.as_mut().expect("weft was started");
        super::wait::until(
            "weft answering /health",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || {
                if let Some(status) = child.try_wait().ok().flatten() {
                    panic!(
                        "weft exited with {status} while starting; log:\n{}",
                        log_text()
                    );
                }
                match http().get(&health).send() {
                    Ok(answer) if answer.status().is_success() => Ok(()),
                    Ok(answer) => Err(answer.status().to_string()),
                    Err(error) => Err(error.to_string()),
                }
            },
            || format!("log:\n{}", log_text()),
        );
    }

    /// The URL of `path` on weft's metrics listener.
    pub fn metrics_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.metrics_port)
    }

    /// The base URL of the API plus `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// The process id of the running weft, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Everything weft logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills weft with SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL weft");
            child.wait().expect("reap weft");
        }
    }

    /// Sends SIGTERM and waits for a clean exit, returning the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM weft");
        child.wait().expect("reap weft").code()
    }

    /// Starts weft again on the same config, data directory and port.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// `receive` on the pull API of `sink`.
    pub fn receive(&self, sink: &str, batch_size: usize, wait_for_ms: u64) -> Vec<Value> {
        let response = http()
            .get(self.url(&format!(
                "/api/http_pull_consumers/{sink}/receive?batch_size={batch_size}&wait_for={wait_for_ms}"
            )))
            .send()
            .expect("receive");
        assert!(
            response.status().is_success(),
            "receive failed: {}",
            response.text().unwrap_or_default()
        );
        let body: Value = response.json().expect("receive returns JSON");
        body["data"]
            .as_array()
            .expect("receive returns {data: [...]}")
            .clone()
    }

    /// Like [`WeftProcess::receive`], but `None` when weft does not answer
    /// (down, or restarting) instead of panicking. A request weft refuses
    /// (4xx) still panics: it would fail the same way every time.
    pub fn try_receive(
        &self,
        sink: &str,
        batch_size: usize,
        wait_for_ms: u64,
    ) -> Option<Vec<Value>> {
        let response = http()
            .get(self.url(&format!(
                "/api/http_pull_consumers/{sink}/receive?batch_size={batch_size}&wait_for={wait_for_ms}"
            )))
            .send()
            .ok()?;
        let status = response.status();
        assert!(
            !status.is_client_error(),
            "receive refused ({status}): {}",
            response.text().unwrap_or_default()
        );
        if !status.is_success() {
            return None;
        }
        let body: Value = response.json().ok()?;
        body["data"].as_array().cloned()
    }

    /// Receives until `count` messages arrived or `timeout` passed, acking
    /// nothing. Messages stay in flight until acked or nacked.
    pub fn receive_at_least(&self, sink: &str, count: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut all = Vec::new();
        while all.len() < count && Instant::now() < deadline {
            all.extend(self.receive(sink, 1000, 1000));
        }
        all
    }

    /// The value of metric `name` at `/metrics` in the series whose labels
    /// include `labels`, if weft exports it.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let text = http().get(self.url("/metrics")).send().ok()?.text().ok()?;
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (series, value) = rest.rsplit_once("} ")?;
            let has = |(key, value): &(&str, &str)| {
                series
                    .split(',')
                    .any(|pair| pair == format!("{key}=\"{value}\""))
            };
            labels.iter().all(has).then(|| value.trim().parse().ok())?
        })
    }

    /// `GET /api/health`: every entity's checks.
    pub fn health(&self) -> Value {
        http()
            .get(self.url("/api/health"))
            .send()
            .expect("GET /api/health")
            .json()
            .expect("/api/health returns JSON")
    }

    /// The `/api/health` entity of `kind` named `name`, if weft reports one.
    pub fn health_entity(&self, kind: &str, name: &str) -> Option<Value> {
        self.health()["entities"]
            .as_array()?
            .iter()
            .find(|e| e["kind"] == kind && e["name"] == name)
            .cloned()
    }

    /// The failing check `id` of that entity, if it has one.
    pub fn health_check(&self, kind: &str, name: &str, id: &str) -> Option<Value> {
        self.health_entity(kind, name)?["checks"]
            .as_array()?
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
    }

    /// POSTs `{"yaml": yaml}` to `/api/config/apply`, retrying while weft
    /// restarts; answers the status and the JSON body.
    pub fn apply_config(&self, yaml: &str) -> (u16, Value) {
        self.wait_until("the API", Duration::from_secs(60), || {
            let response = http()
                .post(self.url("/api/config/apply"))
                .json(&serde_json::json!({ "yaml": yaml }))
                .send()
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            Ok::<_, String>((status, response.json().unwrap_or(Value::Null)))
        })
    }

    /// Waits up to 30 s until that check is an error, and answers its
    /// message.
    pub fn wait_for_failed_check(&self, kind: &str, name: &str, id: &str) -> String {
        let failed = self.wait_until(
            &format!("an error in the {id} check of {kind} {name}"),
            std::time::Duration::from_secs(30),
            || {
                self.health_check(kind, name, id)
                    .filter(|c| c["status"] == "error")
                    .ok_or("no error yet")
            },
        );
        failed["message"].as_str().unwrap_or_default().to_string()
    }

    /// `GET path` on weft's API, as JSON (panics unless it is JSON).
    pub fn get_json(&self, path: &str) -> Value {
        http()
            .get(self.url(path))
            .send()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .json()
            .unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}"))
    }

    /// Receives and acks `sink`'s messages until `count` arrived or
    /// `timeout` passed; returns their `data` in the order received.
    pub fn drain(&self, sink: &str, count: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        while got.len() < count && Instant::now() < deadline {
            let batch = self.receive(sink, 1000, 1000);
            let ids: Vec<&str> = batch
                .iter()
                .map(|m| m["ack_id"].as_str().expect("an ack_id"))
                .collect();
            if !ids.is_empty() {
                assert_eq!(self.settle(sink, "ack", &ids).0, 200, "ack failed");
            }
            got.extend(batch.iter().map(|m| m["data"].clone()));
        }
        got
    }

    /// `ack` or `nack` (`verb`) on the pull API; returns the HTTP status and body.
    pub fn settle(&self, sink: &str, verb: &str, ack_ids: &[&str]) -> (u16, Value) {
        let response = http()
            .post(self.url(&format!("/api/http_pull_consumers/{sink}/{verb}")))
            .json(&json!({ "ack_ids": ack_ids }))
            .send()
            .expect("ack/nack");
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }
}

impl Drop for WeftProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A blocking HTTP client with test-friendly timeouts.
pub fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

/// The weft binary under test: `WEFT_BIN` when set (a benchmark runs an
/// older build as its baseline), else the one cargo built with the tests.
pub fn weft_binary() -> std::path::PathBuf {
    std::env::var_os("WEFT_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_weft").into())
}

/// Runs weft on `config` until it exits (it must refuse to start: after
/// 60 s it is killed and the test fails); returns its exit code and its
/// stderr followed by its stdout.
pub fn run_weft_with(config: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.yml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(weft_binary())
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&path)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run weft");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("weft kept running; it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    (output.status.code(), text)
}
