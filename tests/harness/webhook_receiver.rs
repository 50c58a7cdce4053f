//! A webhook receiver on loopback, run inside the test process so that it
//! outlives weft's crashes: it checks each request's signature and headers,
//! can fail or hang on demand, and records what it accepted.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// The endpoint's signing secret the receiver checks.
pub const SECRET: &str = "hook-secret";
/// The secret `Authorization` header the receiver expects.
pub const TOKEN: &str = "Bearer s3cret-token-41";

/// Per row id: (action, v, (commit_lsn, commit_idx)) of each message.
pub type Rows = BTreeMap<i64, Vec<(String, i64, (u64, u64))>>;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 200, recording the messages (unless a poisoned row is in the request).
    Accept,
    /// 500.
    Fail,
    /// Sleeps past weft's request timeout, then 500.
    Hang,
    /// Like `Accept`, after a second.
    SlowAccept,
}

#[derive(Debug)]
pub struct State {
    pub mode: Mode,
    /// Requests holding a message of this row id fail with 500.
    pub poisoned: Option<i64>,
    /// Requests holding row `.0` at `v` = `.1` wait `.2` before answering.
    pub stalled: Option<(i64, i64, Duration)>,
    /// Accepted messages in arrival order, with the path they came on.
    pub accepted: Vec<(String, Value)>,
    /// Accepted requests: method, path, `X-Table` header, message count.
    pub requests: Vec<(String, String, String, usize)>,
    /// Accepted request bodies as sent (before gzip is undone): path,
    /// `Content-Type` header, body.
    pub bodies: Vec<(String, String, Vec<u8>)>,
    /// Requests answered 500.
    pub failed: usize,
    /// Requests left hanging.
    pub hung: usize,
    /// Requests that reached the handler.
    pub started: usize,
    /// Requests whose signature, auth header or encoding was wrong.
    pub bad_requests: Vec<String>,
}

/// A webhook receiver on 127.0.0.1 with its own runtime.
pub struct Receiver {
    state: Arc<Mutex<State>>,
    /// Where it listens.
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    /// Starts a receiver answering in `mode`.
    pub fn start(mode: Mode) -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(Mutex::new(State {
            mode,
            poisoned: None,
            stalled: None,
            accepted: Vec::new(),
            requests: Vec::new(),
            bodies: Vec::new(),
            failed: 0,
            hung: 0,
            started: 0,
            bad_requests: Vec::new(),
        }));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::clone(&state);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = Arc::clone(&shared);
                async move { handle(state, method, uri, headers, body).await }
            },
        );
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            state,
            addr,
            _runtime: runtime,
        }
    }

    /// Changes how it answers.
    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = mode;
    }

    /// Makes requests holding row `row` fail.
    pub fn set_poisoned(&self, row: Option<i64>) {
        self.state.lock().unwrap().poisoned = row;
    }

    /// Makes requests holding row `row` at `v` wait `stall` before they
    /// are answered, as a destination slow for one message.
    pub fn set_stalled(&self, row: i64, v: i64, stall: Duration) {
        self.state.lock().unwrap().stalled = Some((row, v, stall));
    }

    /// Runs `f` on the state.
    pub fn with<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    /// Waits until `done` holds for the state, or panics with `what` after `timeout`.
    pub fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&State) -> bool) {
        super::wait::until(
            what,
            timeout,
            Duration::from_millis(50),
            || {
                if self.with(&done) {
                    Ok(())
                } else {
                    Err("not yet")
                }
            },
            || format!("receiver state: {:?}", self.with(|s| format!("{s:?}"))),
        )
    }

    /// Accepted messages on `path`, deduplicated by idempotency key (first
    /// arrival kept), grouped by row id: (action, v, commit position).
    pub fn rows(&self, path: &str) -> Rows {
        let mut seen = HashSet::new();
        let mut rows: BTreeMap<i64, Vec<_>> = BTreeMap::new();
        self.with(|s| {
            for (p, message) in &s.accepted {
                if p != path {
                    continue;
                }
                let key = message["metadata"]["idempotency_key"]
                    .as_str()
                    .unwrap()
                    .to_string();
                if !seen.insert(key) {
                    continue;
                }
                let id = message["record"]["id"].as_i64().unwrap();
                rows.entry(id).or_default().push((
                    message["action"].as_str().unwrap().to_string(),
                    message["record"]["v"].as_i64().unwrap(),
                    (
                        message["metadata"]["commit_lsn"].as_u64().unwrap(),
                        message["metadata"]["commit_idx"].as_u64().unwrap(),
                    ),
                ));
            }
        });
        rows
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let mut problems = Vec::new();
    let json_body = if header("content-encoding") == "gzip" {
        let mut plain = Vec::new();
        if flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut plain)
            .is_err()
        {
            problems.push("body is not gzip".to_string());
        }
        plain
    } else {
        body.to_vec()
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{}.", header("x-weft-timestamp")).as_bytes());
    mac.update(&json_body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    if header("x-weft-signature") != expected {
        problems.push(format!("bad signature {:?}", header("x-weft-signature")));
    }
    if header("authorization") != TOKEN || header("x-test") != "plain" {
        problems.push("missing configured headers".to_string());
    }
    let parsed: Value = serde_json::from_slice(&json_body).unwrap_or(Value::Null);
    let messages: Vec<Value> = match parsed.get("data").and_then(Value::as_array) {
        Some(batch) => batch.clone(),
        None => vec![parsed],
    };
    let (mode, stalled) = {
        let mut s = state.lock().unwrap();
        if !problems.is_empty() {
            s.bad_requests.extend(problems);
            return StatusCode::UNAUTHORIZED;
        }
        s.started += 1;
        (s.mode, s.stalled)
    };
    if let Some((row, v, stall)) = stalled
        && messages.iter().any(|m| {
            m["record"]["id"].as_i64() == Some(row) && m["record"]["v"].as_i64() == Some(v)
        })
    {
        tokio::time::sleep(stall).await;
    }
    if mode == Mode::SlowAccept {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    match mode {
        Mode::Fail => {
            state.lock().unwrap().failed += 1;
            StatusCode::INTERNAL_SERVER_ERROR
        }
        Mode::Hang => {
            state.lock().unwrap().hung += 1;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            StatusCode::INTERNAL_SERVER_ERROR
        }
        Mode::Accept | Mode::SlowAccept => {
            let mut s = state.lock().unwrap();
            let poisoned = s.poisoned.is_some_and(|row| {
                messages
                    .iter()
                    .any(|m| m["record"]["id"].as_i64() == Some(row))
            });
            if poisoned {
                s.failed += 1;
                return StatusCode::INTERNAL_SERVER_ERROR;
            }
            let path = uri.path().to_string();
            s.requests.push((
                method.to_string(),
                path.clone(),
                header("x-table"),
                messages.len(),
            ));
            s.bodies
                .push((path.clone(), header("content-type"), body.to_vec()));
            s.accepted
                .extend(messages.into_iter().map(|m| (path.clone(), m)));
            StatusCode::OK
        }
    }
}
